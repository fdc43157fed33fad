"""The orchestrator: HTTP and SSE routes, services, and supervised background loops."""
