"""Repository tooling that is not part of the installed package (issue 33: build and measure)."""
