"""The numpy backend: the reference semantics and the embedded default (``numpy:0``)."""
