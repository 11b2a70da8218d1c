"""What the window shows and decides, without widgets: the chat, reply, engine, speed and Compare presenters and the plain words they say (tested without a window)."""
