"""torchft (github.com/pytorch/torchft) as a system under test: one replica group per process, a Lighthouse for
quorum, torchft's DiLoCo on CPU with gloo (``python -m peers.torchft.train``)."""
