"""Recall: the memories that best answer a query (query), with the indexes that keep it exact or
fast at scale (columns, ann).
"""
