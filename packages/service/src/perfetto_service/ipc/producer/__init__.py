"""A producer's ProducerEndpoint over the producer socket."""
