"""Open Memory, the organism: one agent's memory on one machine, with no network.

This package must never import ``openmemory_node`` nor libp2p: the engine talks to a node,
when there is one, through the node's local HTTP API.
"""

__version__ = "0.1.0"
