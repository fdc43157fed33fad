"""Services: the orchestrator's operations. They talk to the store, never to the web framework."""
