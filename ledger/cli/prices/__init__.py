"""What things cost, from the command line: offers and prices, exchange rates, carbon, fleets, budgets, cost comparisons, forecasts and plans."""
