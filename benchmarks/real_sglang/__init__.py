"""Harnesses that run specgate against real SGLang on a GPU box."""
