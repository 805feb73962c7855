"""Extension points: typed hook signatures (``hooks``) and the checking loader (``loader``)."""
