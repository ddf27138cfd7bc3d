package runledger

import "github.com/google/uuid"

// Scope is the tenant a caller acts in. Every scoped read and write matches
// it exactly: Global sees only jobs without an organization, and
// Organization(x) sees only jobs of organization x. A job outside the
// caller's scope behaves as if it did not exist. The zero Scope is Global.
type Scope struct {
	org   uuid.UUID
	isOrg bool
}

// Global returns the scope of jobs that belong to no organization.
func Global() Scope { return Scope{} }

// Organization returns the scope of one organization's jobs. The nil UUID
// is no organization's id (organization_id stores the global scope as the
// nil UUID): every operation refuses Organization(uuid.Nil) with the
// Validation error CodeOrganizationInvalid before it reads or writes.
func Organization(id uuid.UUID) Scope { return Scope{org: id, isOrg: true} }

// ScopeOf returns the scope of a job whose organization_id is orgID: Global
// for nil, Organization(*orgID) otherwise. Use it to derive the scope of a
// replay from a source job the caller has already authorized.
func ScopeOf(orgID *uuid.UUID) Scope {
	if orgID == nil {
		return Global()
	}
	return Organization(*orgID)
}

// IsGlobal reports whether s is the global scope.
func (s Scope) IsGlobal() bool { return !s.isOrg }

// OrganizationID returns the organization of s, and false for Global.
func (s Scope) OrganizationID() (uuid.UUID, bool) { return s.org, s.isOrg }

// OrganizationIDPtr returns the organization of s as the nullable value
// stored in organization_id: nil for Global. Each call returns a new
// pointer.
func (s Scope) OrganizationIDPtr() *uuid.UUID {
	if !s.isOrg {
		return nil
	}
	id := s.org
	return &id
}

// String returns "global" or "organization:<uuid>".
func (s Scope) String() string {
	if !s.isOrg {
		return "global"
	}
	return "organization:" + s.org.String()
}
