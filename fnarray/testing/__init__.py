"""Reusable test material for backend authors: one case per primitive (``cases``)."""
