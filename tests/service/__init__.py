"""The service tests and their helpers (`service.harness`, `service.chaos`)."""
