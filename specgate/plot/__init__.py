"""Figures the claims and reports attach: matplotlib drawn off-screen into PNG bytes."""
