"""What the lab holds: its folder, engine files, launch profiles, and the CLI contracts that check them."""
