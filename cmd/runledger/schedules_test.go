package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// testSchedules drives every schedules command on one database: the S
// object's fields, the dispositions, the scopes, exit 4 for an unknown
// name and exit 2 for a bad cron or zone (before any database work).
func testSchedules(t *testing.T, c *cli) {
	e := db(t)
	c.define(t, e, "report")
	org := uuid.NewString()

	out := c.ok(t, e, "schedules", "upsert", "--name", "nightly", "--cron", "0 3 * * *", "--type", "report",
		"--tz", "Europe/Berlin", "--payload", `{"kind":"daily"}`, "--org", org, "--jitter", "30s", "--priority", "5", "--json")
	res := object(t, out.stdout)
	wantKeys(t, "upsert", res, "outcome", "disposition", "schedule")
	if str(t, res, "outcome") != "schedule" || str(t, res, "disposition") != "inserted" {
		t.Fatalf("upsert: %s", out.stdout)
	}
	s := sub(t, res, "schedule")
	wantKeys(t, "schedule", s, "name", "org", "cron", "tz", "job_type", "payload", "priority", "jitter_seconds",
		"missed", "missed_max", "active", "next_fire_at", "last_fired_at")
	if str(t, s, "name") != "nightly" || str(t, s, "org") != org || str(t, s, "tz") != "Europe/Berlin" ||
		num(t, s, "jitter_seconds") != 30 || num(t, s, "priority") != 5 || str(t, s, "missed") != "latest" ||
		num(t, s, "missed_max") != 10 || string(s["active"]) != "true" || !isNull(s, "last_fired_at") {
		t.Fatalf("schedule: %s", out.stdout)
	}
	if next := wantUTC(t, s, "next_fire_at"); next.Before(time.Now().Add(-time.Minute)) {
		t.Errorf("next fire %s in the past", next)
	}
	var payload map[string]any
	if err := json.Unmarshal(s["payload"], &payload); err != nil || payload["kind"] != "daily" {
		t.Errorf("payload %s", s["payload"])
	}
	again := object(t, c.ok(t, e, "schedules", "upsert", "--name", "nightly", "--cron", "0 3 * * *", "--type", "report",
		"--tz", "Europe/Berlin", "--payload", `{"kind": "daily"}`, "--org", org, "--jitter", "30s", "--priority", "5", "--json").stdout)
	if str(t, again, "disposition") != "unchanged" {
		t.Errorf("same upsert: %v", again)
	}
	// Global scope: org is null; a second schedule lists after the first.
	g := sub(t, object(t, c.ok(t, e, "schedules", "upsert", "--name", "hourly", "--cron", "0 * * * *", "--type", "report",
		"--missed", "all", "--missed-max", "3", "--active=false", "--json").stdout), "schedule")
	if !isNull(g, "org") || str(t, g, "tz") != "UTC" || str(t, g, "missed") != "all" || num(t, g, "missed_max") != 3 ||
		string(g["active"]) != "false" || !isNull(g, "priority") {
		t.Fatalf("global schedule: %v", g)
	}

	list := list(t, object(t, c.ok(t, e, "schedules", "list", "--org", org, "--json").stdout), "schedules")
	if len(list) != 1 || str(t, list[0], "name") != "nightly" {
		t.Fatalf("list of org: %v", list)
	}
	shown := object(t, c.ok(t, e, "schedules", "show", "--name", "hourly", "--json").stdout)
	wantKeys(t, "show", shown, "outcome", "schedule")
	if r := sub(t, object(t, c.ok(t, e, "schedules", "resume", "--name", "hourly", "--json").stdout), "schedule"); string(r["active"]) != "true" {
		t.Errorf("resume: %v", r)
	}
	if p := sub(t, object(t, c.ok(t, e, "schedules", "pause", "--name", "nightly", "--org", org, "--json").stdout), "schedule"); string(p["active"]) != "false" {
		t.Errorf("pause: %v", p)
	}
	// Another scope does not see it: not found, exit 4.
	for _, verb := range []string{"show", "pause", "resume", "delete"} {
		if code := wantError(t, c.want(t, 4, e, "schedules", verb, "--name", "nightly", "--json"), "not_found"); code != "schedule.not_found" {
			t.Errorf("%s from the global scope: %s", verb, code)
		}
	}
	d := sub(t, object(t, c.ok(t, e, "schedules", "delete", "--name", "nightly", "--org", org, "--json").stdout), "schedule")
	if str(t, d, "name") != "nightly" || string(d["active"]) != "false" {
		t.Errorf("delete printed %v", d)
	}
	c.want(t, 4, e, "schedules", "show", "--name", "nightly", "--org", org, "--json")

	// Bad cron or zone: validation, exit 2, nothing written, no database
	// needed.
	bad := env{databaseURL: "postgres://nobody@127.0.0.1:1/none?sslmode=disable"}
	for _, args := range [][]string{
		{"--cron", "0 3 * *", "--type", "report"},
		{"--cron", "0 3 * * *", "--tz", "Atlantis/Capital", "--type", "report"},
		{"--cron", "0 3 * * *", "--type", "report", "--payload", "[1]"},
	} {
		out := c.want(t, 2, bad, append([]string{"schedules", "upsert", "--name", "x", "--json"}, args...)...)
		if code := wantError(t, out, "validation"); !strings.HasPrefix(code, "schedule.") {
			t.Errorf("%v: %s", args, code)
		}
	}
	c.want(t, 2, bad, "schedules", "show", "--name", " ", "--json")
	out = c.ok(t, e, "schedules", "show", "--name", "hourly")
	if !strings.Contains(out.stdout, "Schedule hourly") || !strings.Contains(out.stdout, "0 * * * * (UTC)") {
		t.Errorf("text output: %s", out.stdout)
	}
}
