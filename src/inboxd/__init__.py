"""inboxd: a self-hostable developer email platform."""
