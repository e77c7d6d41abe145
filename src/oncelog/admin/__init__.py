"""Administration over the wire (the CLI's and, later, a web console's): each module talks to
brokers with ``oncelog.client.ProtocolClient`` and keeps its decisions in pure functions."""
