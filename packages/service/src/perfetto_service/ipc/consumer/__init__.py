"""A consumer's ConsumerEndpoint over the consumer socket."""
