"""Studies: a comparison of engine profiles (x overrides x hosts) as one unattended, resumable job."""
