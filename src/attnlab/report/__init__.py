"""What a reader sees: figures, HTML pages, the claims page and the run summary."""
