"""What every layer stands on: the config and its checks, errors that end a job in one line, safe
outputs with their provenance, code versions, the device, and the job a workflow rule runs."""
