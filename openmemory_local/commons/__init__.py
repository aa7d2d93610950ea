"""The commons, seen from the engine: what leaves the machine (form, publish), what arrives and how
it is verified (receive), which received lessons may be shown (state), and the node's local HTTP
API (node_link), the engine's only link to a node.
"""
