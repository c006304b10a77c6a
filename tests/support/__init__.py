"""Test support: throwaway PostgreSQL clusters and helpers shared by the test packages."""
