module github.com/telsonhq/telson

go 1.22
