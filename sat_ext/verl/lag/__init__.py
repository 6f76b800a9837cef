"""verl's side of the lag modes: :mod:`.overrides` (a ``lag:`` block as verl overrides, and the check), :mod:`.prepared`
(the driver's check, once), :mod:`.trainer` (with :mod:`.kept_weights` and :mod:`.resubmit`) and :mod:`.sampler`."""
