"""``make demo`` (``python -m oncelog_tools.demo``): see ``__main__``."""
