"""specgate: acceptance and regression harness for EAGLE-3 drafters served with SGLang."""

__version__ = "0.1.0"
