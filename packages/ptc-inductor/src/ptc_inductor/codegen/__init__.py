"""Backends: C++/OpenMP kernels and the Python wrapper that calls them."""
