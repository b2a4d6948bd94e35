"""The papers' analyses: computations over models, dumps and tables, and the claims judged on
them. Each writes nothing; a stage (attnlab.stages) reads its inputs and writes its outputs."""
