"""The registry's errors, as Confluent's REST API answers them: ``{"error_code", "message"}``
with the HTTP status of the code's first three digits (40401 -> 404, 42201 -> 422, 409 -> 409).

Every refusal of the core is a ``RegistryError``; the HTTP shell (http.py) is the one place
they become answers. The messages are the ones clients and tools match on (Confluent's wording,
typos included where tools depend on them)."""

from __future__ import annotations


class RegistryError(Exception):
    """An answer other than success: ``code`` (Confluent's error code), ``message``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def status(self) -> int:
        """The HTTP status: the code's first three digits (Confluent's rule)."""
        return int(str(self.code)[:3])

    def to_json(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(40405, f"Subject '{subject}' was not deleted first before being permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(40406, f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to "
                                "delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(40407, f"Subject '{subject}' Version {version} was not deleted first before being "
                                "permanently deleted")


def subject_level_compatibility_not_configured(subject: str) -> RegistryError:
    return RegistryError(40408, f"Subject '{subject}' does not have subject-level compatibility configured")


def subject_level_mode_not_configured(subject: str) -> RegistryError:
    return RegistryError(40409, f"Subject '{subject}' does not have subject-level mode configured")


def incompatible(subject: str, messages: list[str]) -> RegistryError:
    return RegistryError(409, f"Schema being registered is incompatible with an earlier schema for subject "
                              f"\"{subject}\", details: [{', '.join(messages)}]")


def invalid_schema(why: str) -> RegistryError:
    return RegistryError(42201, f"Invalid schema: {why}")


def invalid_version(version: object) -> RegistryError:
    return RegistryError(42202, f"The specified version '{version}' is not a valid version id. Allowed values are "
                                "between [1, 2^31-1] and the string \"latest\"")


def invalid_compatibility(level: object) -> RegistryError:
    return RegistryError(42203, "Invalid compatibility level. Valid values are none, backward, forward, full, "
                                "backward_transitive, forward_transitive, and full_transitive")


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(42204, "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT.")


def not_permitted(why: str) -> RegistryError:
    return RegistryError(42205, why)


def reference_exists(why: str) -> RegistryError:
    return RegistryError(42206, why)


def id_mismatch(why: str) -> RegistryError:
    return RegistryError(42207, why)


def invalid_subject(subject: str) -> RegistryError:
    return RegistryError(42208, f"The specified subject '{subject}' is not a valid.")


def bad_request(why: str) -> RegistryError:
    """A body that is not the JSON the endpoint takes (Confluent answers 400 / 422 there)."""
    return RegistryError(422, why)


def store_error(why: str) -> RegistryError:
    return RegistryError(50001, f"Error in the backend data store - {why}")


def timeout(why: str) -> RegistryError:
    return RegistryError(50002, f"Operation timed out - {why}")


def unauthorized() -> RegistryError:
    return RegistryError(40101, "Unauthorized")


def forbidden(principal: str, operation: str, resource: str) -> RegistryError:
    return RegistryError(40301, f"User is denied operation {operation} on {resource} ({principal})")
