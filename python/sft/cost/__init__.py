"""Target descriptions as data, and the analytical cost model that reads them."""
