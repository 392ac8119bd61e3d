"""The main job around one record: up, down, status, resident deployments, export/reproduce, pin, the store."""
