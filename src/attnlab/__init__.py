"""attnlab: what self-attention does, measured (Hao et al. 2021; Brunner et al. 2020)."""

__version__ = "0.1.0"
