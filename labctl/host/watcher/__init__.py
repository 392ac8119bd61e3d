"""The restart watcher of a resident deployment: the standalone program, and how it runs on a remote host."""
