"""Results side by side: the same-rules checklist, table formats, and the report folder."""
