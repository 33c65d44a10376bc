-- a store written by swarmfab before Alembic (schema v1), dumped with sqlite3 iterdump
BEGIN TRANSACTION;
CREATE TABLE candidates (
	id VARCHAR(64) NOT NULL, 
	workload VARCHAR(128) NOT NULL, 
	backend VARCHAR(32) NOT NULL, 
	body JSON NOT NULL, 
	agent VARCHAR(128) NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "candidates" VALUES('78eae759df7638d4','kda','c','{"workload": "kda", "backend": "c", "sources": {"k.c": "/* parent */ int kda_forward(void) { return 0; }"}, "entry": "k.c", "flags": ["-O2"], "knobs": {"tile_v": 32, "passes": "fused"}, "parents": [], "agent": "builtin-tiling", "rationale": "start", "id": "78eae759df7638d4"}','builtin-tiling','2026-11-29 20:15:50.192570');
INSERT INTO "candidates" VALUES('92ab503c73c3bb0e','kda','c','{"workload": "kda", "backend": "c", "sources": {"k.c": "/* child */ int kda_forward(void) { return 0; }"}, "entry": "k.c", "flags": ["-O2"], "knobs": {"tile_v": 64, "passes": "fused"}, "parents": ["78eae759df7638d4"], "agent": "builtin-tiling", "rationale": "tile_v: 32 -> 64", "id": "92ab503c73c3bb0e"}','builtin-tiling','2026-11-29 20:15:50.198013');
CREATE TABLE cases (
	id INTEGER NOT NULL, 
	workload VARCHAR(128) NOT NULL, 
	name VARCHAR(256) NOT NULL, 
	origin TEXT NOT NULL, 
	body JSON NOT NULL, 
	run_id VARCHAR(32), 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);
CREATE TABLE events (
	id INTEGER NOT NULL, 
	run_id VARCHAR(32) NOT NULL, 
	kind VARCHAR(64) NOT NULL, 
	detail TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
INSERT INTO "events" VALUES(1,'20261129-201550-7b079c','champion-changed','92ab503c73c3bb0e by builtin-tiling','2026-11-29 20:15:50.200185');
CREATE TABLE host_peaks (
	fingerprint VARCHAR(512) NOT NULL, 
	flops_per_s FLOAT NOT NULL, 
	bytes_per_s FLOAT NOT NULL, 
	measured_at DATETIME NOT NULL, 
	PRIMARY KEY (fingerprint)
);
INSERT INTO "host_peaks" VALUES('cpu | x86_64 avx | 2 threads',100000000000.0,20000000000.0,'2026-11-29 20:15:50.201908');
CREATE TABLE runs (
	id VARCHAR(32) NOT NULL, 
	workload VARCHAR(128) NOT NULL, 
	goal JSON NOT NULL, 
	host JSON NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	started_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	champion_id VARCHAR(64), 
	summary JSON, 
	PRIMARY KEY (id)
);
INSERT INTO "runs" VALUES('20261129-201550-7b079c','kda','{"workload": "kda", "budget": 40.0}','{"machine": "x86_64", "threads": 2, "isa": "x86_64 avx avx2 avx512f fma"}','finished','2026-11-29 20:15:50.189852','2026-11-29 20:15:50.202632','92ab503c73c3bb0e','{"champion": "92ab503c73c3bb0e", "shapes": []}');
CREATE TABLE swarmfab_meta (
	"key" VARCHAR(64) NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY ("key")
);
INSERT INTO "swarmfab_meta" VALUES('schema_version','1');
CREATE TABLE verdicts (
	id INTEGER NOT NULL, 
	run_id VARCHAR(32) NOT NULL, 
	candidate_id VARCHAR(64) NOT NULL, 
	agent VARCHAR(128) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	reason TEXT NOT NULL, 
	speedup FLOAT, 
	became_champion BOOLEAN NOT NULL, 
	demoted TEXT, 
	body JSON NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id), 
	FOREIGN KEY(candidate_id) REFERENCES candidates (id)
);
INSERT INTO "verdicts" VALUES(1,'20261129-201550-7b079c','78eae759df7638d4','builtin-tiling','accepted','verified',2.0,1,NULL,'{"candidate_id": "78eae759df7638d4", "status": "accepted", "reason": "verified", "checks": [{"case": "decode", "check": "o matches reference", "passed": true, "detail": "", "rms_ratio": 1e-07, "max_abs_ratio": 2e-07}], "timings": [{"shape": "B1 T256 H4 K64 V64", "incumbent": "champion", "candidate_s": {"median": 0.001, "low": 0.00095, "high": 0.00105}, "incumbent_s": {"median": 0.002, "low": 0.0019, "high": 0.0021}, "ratio": {"median": 0.5, "low": 0.475, "high": 0.525}, "comparison": "faster", "samples": 12, "roofline_fraction": 0.3}], "elapsed_s": 1.0, "diagnostics": []}','2026-11-29 20:15:50.193229');
INSERT INTO "verdicts" VALUES(2,'20261129-201550-7b079c','92ab503c73c3bb0e','builtin-tiling','accepted','verified',1.25,1,NULL,'{"candidate_id": "92ab503c73c3bb0e", "status": "accepted", "reason": "verified", "checks": [{"case": "decode", "check": "o matches reference", "passed": true, "detail": "", "rms_ratio": 1e-07, "max_abs_ratio": 2e-07}], "timings": [{"shape": "B1 T256 H4 K64 V64", "incumbent": "champion", "candidate_s": {"median": 0.0016, "low": 0.00152, "high": 0.00168}, "incumbent_s": {"median": 0.002, "low": 0.0019, "high": 0.0021}, "ratio": {"median": 0.8, "low": 0.76, "high": 0.8400000000000001}, "comparison": "faster", "samples": 12, "roofline_fraction": 0.3}], "elapsed_s": 1.0, "diagnostics": []}','2026-11-29 20:15:50.198119');
CREATE UNIQUE INDEX ix_cases_workload_name ON cases (workload, name);
CREATE UNIQUE INDEX ix_verdicts_run_candidate ON verdicts (run_id, candidate_id);
COMMIT;
