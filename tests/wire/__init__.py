"""Tests of the wire format (openmemory_node.wire), its spec/ vectors and PROTOCOL.md."""
