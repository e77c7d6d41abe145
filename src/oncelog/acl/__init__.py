"""ACLs (issue 18): Kafka's access-control model (``model.py``), the pure authorizer that decides
(``authorizer.py``), the per-API rules (``rules.py``) and the durable file of the embedded broker
(``file_store.py``). docs/ACLS.md tells the whole story."""
