"""The token-level policy client every act shares: chat rendering, the SGLang client, and the
tool-call and reasoning parsers. HTTP fronts (``adapter/``) and the native loop sit above it."""
