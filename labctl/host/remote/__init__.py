"""Hosts labctl drives and how it reaches the remote ones: the hosts file written and a host made this process's
Docker endpoint, SSH forwards, remote listening ports, the one-shot client container, its lifeline and the
client's local worker processes, and a resident run's key volume."""
