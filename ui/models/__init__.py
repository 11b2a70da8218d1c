"""The Models page: the model in use and its draft, the catalog of pairs, downloads and imports, the pair doctor."""
