"""Command-line tools; each is a thin `main()` over the package."""
