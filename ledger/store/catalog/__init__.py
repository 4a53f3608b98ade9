"""What the ledger prices with: offers and their price versions (``prices``), the shipped presets (``presets``),
fleets and their idle-share policy (``fleets``), exchange rates (``fx``) and grid carbon intensities (``carbon``).
Imports the store's root modules only."""
