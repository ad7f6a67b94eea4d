"""Performance measurements, each side by side with a baseline in the same run (`make bench`)."""
