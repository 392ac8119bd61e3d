"""The Hugging Face Hub: what a revision holds, its files in the HF cache layout, the fetch run on a remote host, the
loopback Hub that serves the lab's own repositories, and the lab's tiny models."""
