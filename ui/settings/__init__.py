"""Settings: the dialog and its tabs, the engine on this computer or a server, and the Serve API switch."""
