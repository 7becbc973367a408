package v1beta2

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// AuthSpec turns etcd's authentication on and declares its users and
// roles, which the hook reconciles to exactly what is written here, one
// change per sync. The hook acts as root, with its client certificate
// (CN root): spec.TLS is required.
// +kubebuilder:validation:XValidation:rule="!has(self.users) || self.users.all(u, u.name != 'root')",message="spec.auth.users: root is the hook's own user and cannot be declared"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || self.roles.all(r, r.name != 'root')",message="spec.auth.roles: root is etcd's built-in role and cannot be declared"
type AuthSpec struct {
	// Enabled turns etcd's authentication on. false turns it off (users
	// and roles stay as they are).
	Enabled bool `json:"enabled"`
	// Prune deletes users and roles that neither the spec nor the hook's
	// record (status.auth) names: ones made by hand. Root is never
	// deleted. Default false: they are left alone.
	// +optional
	Prune bool `json:"prune,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=name
	Roles []AuthRole `json:"roles,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=name
	Users []AuthUser `json:"users,omitempty"`
}

// AuthRole is a role and its permissions.
type AuthRole struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +optional
	Permissions []AuthPermission `json:"permissions,omitempty"`
}

// AuthPermission is a right on a key, a prefix, or a range of keys.
// +kubebuilder:validation:XValidation:rule="!(has(self.prefix) && self.prefix && has(self.rangeEnd) && size(self.rangeEnd) != 0)",message="spec.auth.roles.permissions: prefix and rangeEnd cannot be combined"
type AuthPermission struct {
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
	// RangeEnd ends the range [key, rangeEnd); empty is the key alone.
	// +optional
	RangeEnd string `json:"rangeEnd,omitempty"`
	// Prefix: every key that starts with key.
	// +optional
	Prefix bool `json:"prefix,omitempty"`
	// +kubebuilder:validation:Enum=read;write;readwrite
	Type string `json:"type"`
}

// AuthUser is a user and its roles. Its credentials are the Secret
// <cluster>-user-<name>: a client certificate with CN <name> (tls.crt,
// tls.key, ca.crt) with spec.TLS.auto, else a password (password).
type AuthUser struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Roles are granted to the user: roles of spec.auth.roles, or root.
	// +optional
	Roles []string `json:"roles,omitempty"`
}

// validate repeats the CRD's rules, and what CEL cannot say: a user's
// roles are declared (or root), and auth needs spec.TLS.
func (a *AuthSpec) validate(path *field.Path, tls *TLSPolicy) field.ErrorList {
	if a == nil {
		return nil
	}
	var errs field.ErrorList
	if a.Enabled && !tls.IsSecureClient() {
		errs = append(errs, field.Invalid(path.Child("enabled"), a.Enabled,
			"needs spec.TLS (auto, or static with operatorSecret): the hook authenticates as root with its client certificate"))
	}
	roles := []string{"root"}
	for i, r := range a.Roles {
		p := path.Child("roles").Index(i)
		if r.Name == "root" {
			errs = append(errs, field.Invalid(p.Child("name"), r.Name, "root is etcd's built-in role and cannot be declared"))
		}
		if slices.Contains(roles[1:], r.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), r.Name))
		}
		roles = append(roles, r.Name)
		for j, perm := range r.Permissions {
			pp := p.Child("permissions").Index(j)
			if perm.Key == "" {
				errs = append(errs, field.Required(pp.Child("key"), ""))
			}
			if perm.Prefix && perm.RangeEnd != "" {
				errs = append(errs, field.Invalid(pp.Child("rangeEnd"), perm.RangeEnd, "prefix and rangeEnd cannot be combined"))
			}
			if !slices.Contains([]string{"read", "write", "readwrite"}, perm.Type) {
				errs = append(errs, field.NotSupported(pp.Child("type"), perm.Type, []string{"read", "write", "readwrite"}))
			}
		}
	}
	var users []string
	for i, u := range a.Users {
		p := path.Child("users").Index(i)
		if u.Name == "root" {
			errs = append(errs, field.Invalid(p.Child("name"), u.Name, "root is the hook's own user and cannot be declared"))
		}
		for _, msg := range validation.IsDNS1123Label(u.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), u.Name, msg))
		}
		if slices.Contains(users, u.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), u.Name))
		}
		users = append(users, u.Name)
		for j, r := range u.Roles {
			if !slices.Contains(roles, r) {
				errs = append(errs, field.NotFound(p.Child("roles").Index(j), fmt.Sprintf("%s (not in spec.auth.roles)", r)))
			}
		}
	}
	return errs
}
