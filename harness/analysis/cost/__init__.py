"""What a run costs: the endpoint's tokens at its prices (pricing), the client's own CPU (client_cpu). Pure."""
