"""The report's explorer carries each level as data, inert inside the page: a value from a result file (here a
colleague's base URL) cannot close the script or start markup; the script sets every value as text."""

from __future__ import annotations

import json

from labctl.bench.results import parse_result
from labctl.compare.explore import explorer, explorer_data
from labctl.compare.rules import Entry
from labctl.run.records.record import Record

HOSTILE = "http://x/</script><script>alert(1)</script>&amp;"


def entry() -> Entry:
    levels = [
        {"concurrency": c, "completed": 8, "requests": 8, "median_ttft_ms": 10.0 * c, "output_throughput": 100.0 * c}
        for c in (1, 4)
    ]
    doc = {
        "bench_id": "b20261204-100000-aaaaaa",
        "run_id": "20261204-100000-bbbbbb",
        "levels": levels,
        "workload": {"name": "chat-sweep", "sha256": "1" * 64},
        "target": {"environment_label": "external", "model": "m", "base_url": HOSTILE},
    }
    record = Record(run_id=doc["run_id"], status="external", engine="external", profile="-", served_model_name="m")
    return Entry(given=doc["bench_id"], result=parse_result(doc), record=record, evals={})


def test_the_data_is_every_level_with_its_values_and_stays_inert_in_the_page() -> None:
    data = explorer_data([entry()], [])
    [series] = data["series"]
    assert series["key"] == "A" and HOSTILE in series["label"]
    assert [p["level"] for p in series["points"]] == ["c=1", "c=4"]
    assert [p["values"]["output_throughput"] for p in series["points"]] == [100.0, 400.0]
    html = explorer([entry()], [])
    assert "</script><script>alert" not in html and html.count("</script>") == 2  # the data's and the code's own
    embedded = html.split("id=ex-data>", 1)[1].split("</script>", 1)[0]
    assert json.loads(embedded) == json.loads(json.dumps(data))  # the escapes are JSON's: the same data comes back
    assert "innerHTML" not in html  # values are set as text, never parsed as markup
