"""Op definitions by family; each module registers its ops with :mod:`ember.dispatch`."""
