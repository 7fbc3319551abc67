"""The binding's version; it matches the library's (meson checks, and import warns otherwise)."""
__version__ = "0.1.0"
