"""The stages: one module per workflow rule, named after it, each with `run(job)`, the rule's
orchestration (what it reads, which analyses it calls, what it writes). No stage imports another;
what two stages share lives in the layers below."""
