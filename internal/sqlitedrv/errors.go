package sqlitedrv

// IsUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY constraint
// failure.
func IsUniqueViolation(err error) bool {
	c := code(err)
	return c == codeConstraintUnique || c == codeConstraintPrimaryKey
}

// IsDiskError reports whether err is SQLite's "database or disk is full" or an
// I/O error (by the primary result code).
func IsDiskError(err error) bool {
	c := code(err)
	if c < 0 {
		return false
	}
	c &= 0xff
	return c == codeFull || c == codeIOErr
}

// IsDiskFull reports whether err is SQLite's "database or disk is full" (by
// the primary result code).
func IsDiskFull(err error) bool {
	c := code(err)
	return c >= 0 && c&0xff == codeFull
}
