"""Starting and stopping: up, down, status, preflight, the hosts' inventory, reproduce."""
