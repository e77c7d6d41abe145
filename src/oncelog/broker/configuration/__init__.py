"""Configuration: the broker's properties (``config.py``: parsed, validated, typed), the dynamic
broker configs of AlterConfigs (``dynamic_config.py``), the topic-level configs with their
defaults and synonyms (``topic_config.py``), and the two generated documents
(``compatibility.py`` → docs/COMPATIBILITY.md, ``config_docs.py`` → docs/COMPATIBILITY-configs.md).

May import: oncelog's pure layers and ``oncelog.hostport``; of broker/, only the root's
``routes`` (the doc generator reads the routing table). Everything else in broker/ may import it.
"""
