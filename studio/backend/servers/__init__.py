"""The servers the studio manages: one process each, their launchers, the fleet of them (on this machine or on Ray), its layout and scaling."""
