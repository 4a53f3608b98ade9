"""How the dashboard is served: `trainledger dashboard`, the ASGI app and its Host/Origin guard, sign-in (passwords, sessions, throttling) and the identity of the viewer."""
