"""Devices, buffers, backend registry, placement, partitioning and fallback."""
